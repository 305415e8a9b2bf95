"""``make deploy`` / ``make destroy``: the whole AWS journey of one config (docs/deploy.md).

:mod:`.cli` (entry point, ``python -m whisper_build.deploy``) and :mod:`.args` parse the command;
:mod:`.deploy_plan`, :mod:`.destroy_plan` and :mod:`.ctranslate2_plan` build the :mod:`.steps`;
:mod:`.runner` runs them against a :class:`.session.DeploySession` (:mod:`.session`), implemented with
boto3 by :mod:`.aws_session`; :mod:`.endpoint_wait` and :mod:`.closing` end the journey; :mod:`.prices`
is the cost list. The AWS calls: :mod:`.aws`, :mod:`.credentials`, :mod:`.capacity`, :mod:`.retained`,
:mod:`.teardown`, :mod:`.mig_drain`, :mod:`.pods`, :mod:`.cluster_progress`, :mod:`.kube`; local tools: :mod:`.prereqs`.
"""

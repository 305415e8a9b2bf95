"""Engine build tool: ``python -m whisper_build.release.engine_build --help``.

Builds TensorRT-LLM encoder and decoder engines for one Whisper model on the GPU it runs on,
smoke-tests them, lays out the Triton model repository and writes ``manifest.json``
(``docs/contracts.md`` §4); with ``--publish-bucket`` it also publishes the version to S3.

Modules, one concern each:

* :mod:`.spec` — the build's inputs (model source, derived TensorRT-LLM limits);
* :mod:`.commands` — pure construction of ``convert_checkpoint.py`` / ``trtllm-build`` argv;
* :mod:`.gpu` — ``nvidia-smi`` parsing and runtime versions;
* :mod:`.layout` — the Triton model repository around the engines;
* :mod:`.smoke` — the smoke-test verdict (word error rate against a known transcript);
* :mod:`.cli` — argument parsing and the orchestration that runs the subprocesses.
"""

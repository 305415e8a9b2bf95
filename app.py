#!/usr/bin/env python3
"""CDK app: ``cdk synth [-c config=path/to.yaml]`` → CloudFormation for VPC, storage, EKS + HyperPod.

With ``pipeline.connection_arn``/``repository`` in the config, the app holds the CDK Pipelines stack that
deploys them instead.
"""

import sys

import aws_cdk as cdk

from settings import ConfigError, load_config
from stacks.nag import enable_nag
from stacks.pipeline_stack import add_app

app = cdk.App()
try:
    config_path = app.node.try_get_context("config")
    config = load_config(config_path)
    add_app(app, config, config_path=config_path)
except (ConfigError, ValueError) as err:
    sys.exit(f"error: {err}")
enable_nag(app)
app.synth()

#!/usr/bin/env python3
"""CDK app: ``cdk synth [-c config=path/to.yaml]`` → CloudFormation for VPC, storage, EKS + HyperPod."""

import sys

import aws_cdk as cdk

from settings import ConfigError, load_config
from stacks import add_whisper_stacks
from stacks.nag import enable_nag

app = cdk.App()
try:
    config = load_config(app.node.try_get_context("config"))
    add_whisper_stacks(app, config)
except (ConfigError, ValueError) as err:
    sys.exit(f"error: {err}")
enable_nag(app)
app.synth()

"""Namespace of the generated cdk8s imports (a regular package, so import graphs resolve its modules)."""

"""Observability as code: PromQL, scrape config, rules, Grafana dashboard and the Grafana provisioner.

``queries`` is the one source of every PromQL expression; the Grafana provisioner is a Lambda.
Docs: docs/observability.md.
"""

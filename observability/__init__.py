"""Observability as code: PromQL (``queries``), scrape config, rules, Grafana dashboard and the
Grafana provisioner Lambda. ``queries`` is the one source of every PromQL expression.
"""

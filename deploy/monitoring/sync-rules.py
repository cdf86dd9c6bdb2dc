#!/usr/bin/env python3
"""Writes prometheusrule.yaml (Prometheus Operator) from skua-alerts.yaml (rule file), the one
to edit. deploy/validate.py fails when the two differ.

    python3 deploy/monitoring/sync-rules.py
"""

import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = """\
# The alerting rules of skua-alerts.yaml for the Prometheus Operator (kube-prometheus-stack:
# add its release label, as for podmonitor.yaml). Generated from skua-alerts.yaml, which is the
# one to edit; deploy/validate.py fails when the two differ:
#   python3 deploy/monitoring/sync-rules.py
"""


def render():
    with open(os.path.join(HERE, "skua-alerts.yaml"), encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "skua", "labels": {"app.kubernetes.io/name": "skua", "app.kubernetes.io/part-of": "skua"}},
        "spec": rules,
    }
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=120)


if __name__ == "__main__":
    with open(os.path.join(HERE, "prometheusrule.yaml"), "w", encoding="utf-8") as f:
        f.write(render())

#!/usr/bin/env python3
"""Syntax check of the observability files (no Docker needed): every YAML parses, the compose
file names its services and images, the collector routes each signal, and the Grafana dashboard
is JSON whose panels all have queries.  Usage: python3 eng/observability/check.py"""
import json, pathlib, sys
import yaml

here = pathlib.Path(__file__).parent
errors = []
docs = {p: yaml.safe_load(p.read_text()) for p in sorted(here.rglob("*.y*ml"))}
compose = docs[here / "docker-compose.yml"]
for name, service in compose["services"].items():
    if "image" not in service:
        errors.append(f"compose: service {name} has no image")
collector = docs[here / "otel-collector.yaml"]
for signal in ("traces", "metrics", "logs"):
    pipeline = collector["service"]["pipelines"].get(signal)
    if not pipeline or not all(e in collector["exporters"] for e in pipeline["exporters"]):
        errors.append(f"collector: no {signal} pipeline to a declared exporter")
dashboard = json.loads((here / "grafana/dashboards/allocator.json").read_text())
for panel in dashboard["panels"]:
    if panel["type"] != "row" and not all(t.get("expr") for t in panel.get("targets", [None])):
        errors.append(f"dashboard: panel '{panel['title']}' has a target without a query")
print(f"{len(docs)} YAML files and 1 dashboard ({len(dashboard['panels'])} panels) parsed")
for e in errors:
    print("error:", e)
sys.exit(1 if errors else 0)

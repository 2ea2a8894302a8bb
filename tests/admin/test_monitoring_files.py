"""The files in monitoring/ work: Prometheus' own promtool accepts the alert rules, their unit
tests and the scrape example; every PromQL expression in the rules and in the Grafana dashboard
parses and names only metrics the hub exports; the dashboard is importable as Grafana exports it.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import jupyterhub.metrics
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"
RULES = MONITORING / "alert-rules.yml"
DASHBOARD = json.loads((MONITORING / "grafana-dashboard.json").read_text())

# What gpuspawner exports at /hub/metrics (gpuspawner/metrics.py).
GPUSPAWNER_METRICS = {
    "gpuspawner_gpus",
    "gpuspawner_gpus_held",
    *(
        f"gpuspawner_gpu_{name}"
        for name in [
            "allocated",
            "healthy",
            "utilization_ratio",
            "memory_used_bytes",
            "memory_total_bytes",
            "temperature_celsius",
            "power_watts",
            "idle_seconds",
        ]
    ),
    "gpuspawner_spawns_refused_total",
    "gpuspawner_gpu_seconds_held_total",
    "gpuspawner_gpu_seconds_busy_total",
    *(f"gpuspawner_allocation_duration_seconds_{s}" for s in ("bucket", "sum", "count")),
}
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
JUPYTERHUB_METRICS = {
    family.name + suffix
    for metric in vars(jupyterhub.metrics).values()
    if isinstance(metric, MetricWrapperBase)
    for family in metric.describe()
    for suffix in SUFFIXES.get(family.type, [""])
}
KNOWN_METRICS = GPUSPAWNER_METRICS | JUPYTERHUB_METRICS
LABEL_VALUES = {
    "state": {"free", "allocated", "unhealthy", "external", "excluded"},
    "reason": {"capacity", "limit", "budget", "invalid_options"},
    "status": {"success", "failure", "error"},
    "period": {"24h", "7d", "30d"},
}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "atan2"}
KEYWORDS |= {"inf", "nan"}


def promtool(*args: str, cwd: Path = MONITORING) -> None:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is missing: apt-get install prometheus (it ships /usr/bin/promtool)")
    run = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"promtool {' '.join(args)}:\n{run.stdout}{run.stderr}"


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: what is left once strings, label matchers,
    ranges, grouping clauses, function calls, keywords and numbers are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    words = re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", expr)
    return {word for word, call in words if not call and word.lower() not in KEYWORDS}


def check_exprs(exprs: list[str], tmp_path: Path) -> None:
    """Each expression parses (promtool checks it as a recording rule), names only known
    metrics, and matches only label values the hub sets."""
    matcher = re.compile(rf'\b({"|".join(LABEL_VALUES)})\s*(?:=~|!=|!~|=)\s*"([^"]*)"')
    for expr in exprs:
        unknown = metric_names(expr) - KNOWN_METRICS
        assert not unknown, f"unknown metrics {unknown} in {expr!r}"
        for label, value in matcher.findall(expr):
            assert set(value.split("|")) <= LABEL_VALUES[label], f"{label}={value!r} in {expr!r}"
    rules = [{"record": f"check:expr_{i}", "expr": e} for i, e in enumerate(exprs)]
    (tmp_path / "exprs.yml").write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": rules}]}))
    promtool("check", "rules", str(tmp_path / "exprs.yml"))


def test_metric_names_finds_what_promql_selects() -> None:
    expr = 'sum by (le) (rate(a_bucket{s="x y"}[5m])) and on(uuid) b == bool 0 or c offset 1h'
    assert metric_names(expr) == {"a_bucket", "b", "c"}
    assert "jupyterhub_server_spawn_duration_seconds_bucket" in KNOWN_METRICS


def test_alert_rules_pass_promtool_and_their_unit_tests(tmp_path: Path) -> None:
    promtool("check", "rules", "alert-rules.yml")
    promtool("test", "rules", "alert-rules.test.yml")
    [group] = yaml.safe_load(RULES.read_text())["groups"]
    assert group["name"] == "gpuspawner"
    for rule in group["rules"]:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        if "gpuspawner_gpu_" in rule["expr"]:  # per GPU: say which one
            assert "$labels.index" in rule["annotations"]["summary"], rule["alert"]
    check_exprs([rule["expr"] for rule in group["rules"]], tmp_path)


def test_scrape_example_is_a_valid_prometheus_config(tmp_path: Path) -> None:
    config = yaml.safe_load((MONITORING / "prometheus-scrape.yml").read_text())
    assert config["rule_files"] == [RULES.name]
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/hub/metrics"
    assert job["authorization"]["type"] == "Bearer"
    # promtool wants the token file to exist: check a copy that points at a made-up one.
    (tmp_path / "token").write_text("made-up-token\n")
    job["authorization"]["credentials_file"] = str(tmp_path / "token")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(RULES, tmp_path)
    promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def test_dashboard_imports_into_any_grafana(tmp_path: Path) -> None:
    assert DASHBOARD["schemaVersion"] >= 36
    [source] = DASHBOARD["__inputs"]
    assert (source["type"], source["pluginId"]) == ("datasource", "prometheus")
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables[source["name"]]["type"] == "datasource"  # for provisioning from a file
    datasource = {"type": "prometheus", "uid": "${" + source["name"] + "}"}
    panels = DASHBOARD["panels"]
    required = {r["id"] for r in DASHBOARD["__requires"]}
    assert {"grafana", "prometheus"} | {p["type"] for p in panels} <= required

    assert len({p["id"] for p in panels}) == len(panels), "panel ids are not unique"
    cells = set()
    for p in panels:
        assert p["datasource"] == datasource, p["title"]
        assert all(t["datasource"] == datasource for t in p["targets"]), p["title"]
        assert "unit" in p["fieldConfig"]["defaults"] or p["type"] == "table", p["title"]
        x, y, w, h = (p["gridPos"][k] for k in "xywh")
        assert x >= 0 and w > 0 and x + w <= 24 and y >= 0 and h > 0, p["title"]
        mine = {(x + i, y + j) for i in range(w) for j in range(h)}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine

    def expand(expr: str) -> str:  # Grafana's variables, as Grafana fills them in
        values = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
        values |= {name: ".*" for name, v in variables.items() if v["type"] == "query"}
        return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m[1]], expr)

    exprs = [expand(t["expr"]) for p in panels for t in p["targets"]]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == datasource
            exprs.append(re.fullmatch(r"label_values\((.+),\s*\w+\)", v["definition"])[1])
    check_exprs(exprs, tmp_path)

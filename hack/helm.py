#!/usr/bin/env python3
"""Real Helm (v4, the Go SDK) for the tests and the Makefile, without a helm binary.

Helm is used through the PyPI package helm-python-sdk (import name helm_python), which wraps
Helm's Go library in a shared library; `make helm-sdk` installs it into .local/helm-venv.
Run this with that venv's python:

    hack/helm.py version
    hack/helm.py lint CHART [--set k=v]... [--strict]
    hack/helm.py template CHART [--name N] [--namespace NS] [--set k=v]... [--kubeconfig K]
    hack/helm.py install CHART --name N --namespace NS --kubeconfig K [--set k=v]... [--create-namespace]
    hack/helm.py uninstall --name N --namespace NS --kubeconfig K

--set takes Helm's --set syntax; --set-string keeps the value a string (an empty
watchNamespace, say). `template` prints every rendered manifest as one YAML stream, in
template order, for kubectl or a test to read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

try:
    import helm_python as helm
except ImportError:  # pragma: no cover - a setup error, said plainly
    sys.exit("helm_python is missing: run `make helm-sdk` and use .local/helm-venv/bin/python")


def merge(into: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Deep-merges `new` into `into`, as repeated --set flags do."""
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def values(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for expr in args.set or []:
        merge(out, helm.parse_set_string(expr))
    for expr in args.set_string or []:
        merge(out, helm.parse_set_string_values(expr))
    return out


def stream(manifests: dict[str, str]) -> str:
    """Rendered templates as one YAML stream; NOTES.txt and empty templates left out."""
    docs = []
    for path in sorted(manifests):
        body = manifests[path].strip()
        if path.endswith("NOTES.txt") or not body:
            continue
        docs.append(f"# Source: {path}\n{body}\n")
    return "---\n".join(docs)


def cmd_version(_: argparse.Namespace) -> int:
    print(f"helm SDK {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__})")
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    report = helm.lint(args.chart, values(args), strict=args.strict or None)
    worst = 0
    names = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
    for msg in report.get("messages") or []:
        sev = int(msg.get("severity", 0))
        worst = max(worst, sev)
        print(f"[{names.get(sev, sev)}] {msg.get('path', '')}: {msg.get('error', '')}")
    errors = report.get("errors") or []
    for err in errors:
        print(f"[ERROR] {err}")
    failed = bool(errors) or worst >= 3 or (args.strict and worst >= 2)
    charts = report.get("total_charts_linted", 0)
    print(f"{charts} chart(s) linted, {'failed' if failed else 'no failures'}")
    return 1 if failed or charts < 1 else 0


def cmd_template(args: argparse.Namespace) -> int:
    chart = helm.Chart.load(args.chart)
    if args.kubeconfig:
        # Cluster-aware: .Capabilities are the cluster's (policy/v1 or v1beta1, say).
        with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
            manifests = cfg.render(
                chart, values(args), name=args.name, namespace=args.namespace, is_install=True
            )
    else:
        manifests = chart.render(
            values(args), name=args.name, namespace=args.namespace, is_install=True
        )
    sys.stdout.write(stream(manifests))
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
        release = cfg.install(
            args.chart,
            args.name,
            values(args),
            namespace=args.namespace,
            create_namespace=args.create_namespace,
            timeout=args.timeout,
        )
    summary = {k: release.get(k) for k in ("name", "namespace", "version", "status")}
    print(json.dumps(summary))
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    with helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace) as cfg:
        result = cfg.uninstall(args.name, timeout=args.timeout, ignore_not_found=True)
    print(json.dumps({"info": result.get("info", "")}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_values(p: argparse.ArgumentParser) -> None:
        p.add_argument("--set", action="append", help="Helm --set expression")
        p.add_argument("--set-string", action="append", help="Helm --set-string expression")

    sub.add_parser("version").set_defaults(func=cmd_version)

    p = sub.add_parser("lint")
    p.add_argument("chart")
    p.add_argument("--strict", action="store_true", help="warnings fail too")
    with_values(p)
    p.set_defaults(func=cmd_lint)

    p = sub.add_parser("template")
    p.add_argument("chart")
    p.add_argument("--name", default="podset-operator")
    p.add_argument("--namespace", default="podset-operator-system")
    p.add_argument("--kubeconfig")
    with_values(p)
    p.set_defaults(func=cmd_template)

    p = sub.add_parser("install")
    p.add_argument("chart")
    p.add_argument("--name", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--create-namespace", action="store_true")
    p.add_argument("--timeout", type=int, default=120)
    with_values(p)
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("uninstall")
    p.add_argument("--name", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--timeout", type=int, default=120)
    p.set_defaults(func=cmd_uninstall)

    args = parser.parse_args()
    try:
        return int(args.func(args))
    except helm.HelmError as e:
        print(f"helm {args.command} failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

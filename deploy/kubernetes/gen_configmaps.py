"""Generate deploy/kubernetes/monitoring.yaml: ConfigMaps holding deploy/prometheus/rules.yml and
deploy/grafana/rackscale.json byte for byte (a PrometheusRule is a CRD of the Prometheus Operator, which
not every cluster has; a ConfigMap is read by any Prometheus and by Grafana's dashboard sidecar).

    python deploy/kubernetes/gen_configmaps.py          # rewrite monitoring.yaml
    python deploy/kubernetes/gen_configmaps.py --check  # exit 1 if it is out of date

tests/deploy/test_kubernetes_manifests.py runs the check. Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent
OUTPUT = HERE / "monitoring.yaml"
NAMESPACE = "rackscale"

# (ConfigMap name, data key, source file, extra labels)
SOURCES = [
    ("rackscale-prometheus-rules", "rules.yml", DEPLOY / "prometheus" / "rules.yml", {"prometheus_rule": "1"}),
    (
        "rackscale-grafana-dashboard",
        "rackscale.json",
        DEPLOY / "grafana" / "rackscale.json",
        {"grafana_dashboard": "1"},
    ),
]


def block_scalar(text: str, indent: str) -> str:
    """``text`` as a YAML literal block scalar whose value is exactly ``text`` (header line included)."""
    if not text:
        return '""\n'
    if text[0] in " \t" or text.startswith("\n"):
        raise ValueError("a first line starting with a blank needs an indentation indicator; not supported")
    body = text[:-1] if text.endswith("\n") else text
    if text.endswith("\n\n"):
        chomp, body = "+", text.rstrip("\n")
        trailing = len(text) - len(body) - 1  # the extra empty lines kept by `+`
    else:
        chomp, trailing = ("" if text.endswith("\n") else "-"), 0
    if any(c == "\r" or (ord(c) < 32 and c not in "\t\n") or c == "\ufeff" for c in text):
        raise ValueError("carriage returns, control characters and BOMs do not survive a block scalar")
    lines = [f"{indent}{line}" if line else "" for line in body.split("\n")]
    return f"|{chomp}\n" + "\n".join(lines) + "\n" + "\n" * trailing


def render() -> str:
    docs = []
    for name, key, source, labels in SOURCES:
        rel = source.relative_to(DEPLOY.parent).as_posix()
        label_lines = "".join(
            f'    {k}: "{v}"\n' for k, v in {**labels, "app.kubernetes.io/part-of": "rackscale"}.items()
        )
        docs.append(
            f"# Generated from {rel} by deploy/kubernetes/gen_configmaps.py: do not edit, regenerate.\n"
            "apiVersion: v1\n"
            "kind: ConfigMap\n"
            "metadata:\n"
            f"  name: {name}\n"
            f"  namespace: {NAMESPACE}\n"
            "  labels:\n"
            f"{label_lines}"
            "data:\n"
            f"  {key}: " + block_scalar(source.read_text(encoding="utf-8"), "    ")
        )
    return "---\n".join(docs)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is out of date: run python deploy/kubernetes/gen_configmaps.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

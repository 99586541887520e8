"""The README's support matrix, made from what the test suite itself runs: docs/RUNTIMES_TESTED.md (each runtime's
version and the test behind each capability), scripts/kubelet.sh (the real kubelets the suite builds and runs),
plugins/module_utils/kubelet/kubelet_versions.py (the kubelet versions kubecpu is exact for), meta/runtime.yml and
requirements-dev.in (ansible-core), plugins/module_utils/operations/preflight.py (the nodes' Python) and the guest's
and Molecule's Debian suite. tests/unit/test_docs.py checks that the README holds exactly this block.

    python3 scripts/support_matrix.py            # prints the block
    python3 scripts/support_matrix.py --write    # puts it between the README's markers"""

from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- support matrix: made by scripts/support_matrix.py from what the suite runs; do not edit by hand -->"
END = "<!-- end of the support matrix -->"
DEBIAN = {"bookworm": ("Debian 12", "3.11")}  # a suite the guest and Molecule's nodes are made from: its Python
CAPABILITIES = (  # a column of the runtimes' table: the row of docs/RUNTIMES_TESTED.md's capabilities behind it
    ("agent (loop)", "reconcile over CRI (gRPC)"),
    ("NRI plugin", "NRI plugin"),
    ("fail-closed hook", "fail-closed hook"),
)


def read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def one(pattern: str, text: str, what: str) -> str:
    match = re.search(pattern, text, re.M)
    if not match:
        raise SystemExit("support_matrix: %s not found" % what)
    return match.group(1)


def table(text: str, heading: str) -> list:
    """The rows (lists of cells) of the first Markdown table under ``## heading``."""
    section = text.split("\n## %s\n" % heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows if not set(row) <= set("|- ")]


def tested(cell: str) -> str:
    """A capability cell: "tested" when it names a test, else what it says (``none in 1.6``)."""
    return "tested" if "`tests/" in cell else cell.split(" (", maxsplit=1)[0]


def cgroups(cgroupfs: str, systemd: str) -> tuple:
    v1 = "cgroupfs" if "cgroup v1:" in cgroupfs else "-"
    v2 = [driver for driver, shown in (("cgroupfs", "cgroup v2:" in cgroupfs), ("systemd", "`tests/" in systemd))
          if shown]
    return v1, ", ".join(v2) or "-"


def matrix() -> str:
    runtimes_md = read("docs", "RUNTIMES_TESTED.md")
    runtimes = table(runtimes_md, "The runtimes")[1:]
    capabilities = table(runtimes_md, "Capabilities")
    columns = capabilities[0][1:]
    rows = {row[0]: row[1:] for row in capabilities[1:]}

    def row_of(start: str) -> list:
        (found,) = [cells for name, cells in rows.items() if name.startswith(start)]
        return found

    requires = one(r'^requires_ansible:\s*"?>=\s*([\d.]+)"?', read("meta", "runtime.yml"), "requires_ansible")
    core = one(r"^ansible-core==([\d.]+)", read("requirements-dev.in"), "ansible-core's pin")
    python = one(r"^MIN_PYTHON = \((\d+, \d+)\)", read("plugins", "module_utils", "operations", "preflight.py"),
                 "MIN_PYTHON").replace(", ", ".")
    known = one(r"^KNOWN = \(([\d, ]+)\)", read("plugins", "module_utils", "kubelet", "kubelet_versions.py"), "KNOWN")
    minors = ["1.%s" % minor.strip() for minor in known.split(",")]
    real = re.findall(r"^\s+1\.\d+\) echo v([\d.]+) ;;", read("scripts", "kubelet.sh"), re.M)
    really = {".".join(version.split(".")[:2]) for version in real}
    model_only = [minor for minor in minors if minor not in really]
    suites = {one(r'^SUITE = "(\w+)"', read("scripts", "guest.py"), "the guest's suite"),
              one(r"debootstrap .* (\w+) \"\$root\"", read("scripts", "molecule-image.sh"), "Molecule's suite")}
    (suite,) = suites
    distribution, distribution_python = DEBIAN[suite]

    lines = [BEGIN, "", "| | supported | what the test suite runs |", "|---|---|---|",
             "| ansible-core (controller) | %s or newer | %s |" % (requires.rsplit(".0", 1)[0], core),
             "| Python on the nodes | %s or newer (the preflight refuses older) | %s (%s) |" % (
                 python, distribution_python, distribution),
             "| kubelet | %s | real kubelets %s beside kubecpu%s |" % (
                 ", ".join(minors), ", ".join(real),
                 "; %s from its spec" % ", ".join(model_only) if model_only else ""),
             "| distribution | Linux with systemd (roles); any Linux (`bin/kubecpu`) | %s: host, server guest, "
             "Molecule nodes |" % distribution,
             "", "| runtime | %s | cgroup v1 | cgroup v2 |" % " | ".join(name for name, _row in CAPABILITIES),
             "|---|%s---|---|" % ("---|" * len(CAPABILITIES))]
    for index, column in enumerate(columns):
        name = column if column.startswith(("containerd", "CRI-O")) else "containerd " + column
        cells = [tested(row_of(start)[index]) for _name, start in CAPABILITIES]
        v1, v2 = cgroups(row_of("cgroupfs driver")[index], row_of("systemd driver")[index])
        lines.append("| %s | %s | %s | %s |" % (name, " | ".join(cells), v1, v2))
    crictl = [row for row in runtimes if row[0] == "crictl"]
    lines += ["", "The agent reaches each runtime over CRI (gRPC, the standard library alone) or through crictl (the",
              "suite runs %s). The test behind each cell: [docs/RUNTIMES_TESTED.md](docs/RUNTIMES_TESTED.md)." % (
                  ", ".join("crictl " + row[1] for row in crictl)), "", END]
    return "\n".join(lines) + "\n"


def replace(readme: str, block: str) -> str:
    start, end = readme.index(BEGIN), readme.index(END) + len(END) + 1
    return readme[:start] + block + readme[end:]


def main(argv: list) -> int:
    block = matrix()
    if argv == ["--write"]:
        path = os.path.join(ROOT, "README.md")
        text = read("README.md")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(replace(text, block))
        return 0
    if argv:
        sys.exit(__doc__)
    sys.stdout.write(block)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

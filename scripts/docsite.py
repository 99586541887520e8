"""The collection's docsite, as the Ansible ecosystem builds it: antsibull-docs lints the installed collection's
documentation (every module's DOCUMENTATION, EXAMPLES and RETURN, every role's argument specs, the extra pages of
docs/docsite/ and the references between them), then renders the collection's pages, and every module, role and
playbook must have one. Offline; about 30 s on a 2-CPU machine.

    python scripts/docsite.py COLLECTION DEST   # COLLECTION: .../ansible_collections/kubecpu/cpu_manager

Writes the pages (reStructuredText, as docs.ansible.com takes them) into DEST and their list into DEST/pages.txt.
antsibull-docs is the one next to this interpreter (requirements-dev.txt pins it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import yaml

NAME = "kubecpu.cpu_manager"


def expected_pages(collection: str) -> list:
    """The pages the docsite must have: a module's, a role's, and each extra page (every playbook has one)."""
    modules = sorted(name[:-3] for name in os.listdir(os.path.join(collection, "plugins", "modules"))
                     if name.endswith(".py") and not name.startswith("_"))
    roles = sorted(os.listdir(os.path.join(collection, "roles")))
    with open(os.path.join(collection, "docs", "docsite", "extra-docs.yml"), encoding="utf-8") as handle:
        extra = [page for section in yaml.safe_load(handle)["sections"] for page in section["toctree"]]
    return (["index.rst"] + ["%s_module.rst" % m for m in modules] + ["%s_role.rst" % r for r in roles]
            + ["docsite/%s.rst" % page for page in extra])


def main(collection: str, dest: str) -> int:
    collection = os.path.abspath(collection)
    bindir = os.path.dirname(sys.executable)  # antsibull-docs, and the ansible-doc it runs
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.dirname(collection))),
               ANSIBLE_NOCOLOR="1", PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    tool = os.path.join(bindir, "antsibull-docs")
    started = time.monotonic()
    lint = subprocess.run([tool, "lint-collection-docs", "--plugin-docs", "--validate-collection-refs", "all",
                           "--disallow-unknown-collection-refs", "--check-extra-docs-refs", collection], env=env,
                          check=False)
    if lint.returncode:
        print("docsite: antsibull-docs lint-collection-docs failed (exit %d): above" % lint.returncode, file=sys.stderr)
        return 1
    linted = time.monotonic()
    os.makedirs(dest, mode=0o755, exist_ok=True)
    os.chmod(dest, 0o755)  # antsibull-docs writes only into a directory no one else may write
    build = subprocess.run([tool, "collection", "--use-current", "--squash-hierarchy", "--fail-on-error",
                            "--dest-dir", dest, NAME], env=env, check=False, stdout=subprocess.DEVNULL)
    if build.returncode:
        print("docsite: antsibull-docs collection failed (exit %d): above" % build.returncode, file=sys.stderr)
        return 1
    built = sorted(os.path.relpath(os.path.join(d, f), dest) for d, _dirs, files in os.walk(dest) for f in files
                   if f.endswith(".rst"))
    missing = sorted(set(expected_pages(collection)) - set(built))
    with open(os.path.join(dest, "pages.txt"), "w", encoding="utf-8") as handle:
        handle.write("".join(page + "\n" for page in built))
    print("docsite: linted in %.0f s, %d pages built in %.0f s into %s:" % (
        linted - started, len(built), time.monotonic() - linted, dest))
    for page in built:
        print("  " + page)
    if missing:
        print("docsite: no page for %s" % ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

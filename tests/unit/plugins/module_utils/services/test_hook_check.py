"""The OCI hook's check path (services/hook_check.py): it answers only what it can confirm from the hook's view of the
state, the container's identity and its cgroup, and leaves everything else to the full hook, changing nothing."""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HookInputError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_view import read_view, view_path
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook_check import quick_check

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import ALL, Node


@pytest.fixture(params=["v1", "v2"])
def node(request, tmp_path):
    """A node where the full hook placed one Guaranteed container (2 CPUs) and wrote the view."""
    made = Node(tmp_path, request.param == "v2")
    made.pinned = made.container("Guaranteed", 2000)
    made.held = CPUSet.parse(made.run(made.pinned).cpus)
    made.shared = made.container("Burstable", 500, cpus=ALL - made.held)
    assert read_view(made.state) is not None
    return made


def check(node, made, **settings):
    return quick_check(made["stdin"], node.state, str(node.cgroup), node.kubelet_state, **settings)


def test_a_container_on_its_exclusive_cpus_alone_is_checked(node):
    answer = check(node, node.pinned)
    assert answer == {"action": "checked", "container": "lab/pod-1/app (%s)" % node.pinned["id"][:12],
                      "cpus": str(node.held), "moved": 0}


@pytest.mark.parametrize("where", ["/kubepods/burstable", "nested", "v2 never written"])
def test_another_container_on_its_exclusive_cpus_goes_to_the_full_hook_which_moves_it(node, where):
    """Whoever saved its entry may have been killed, or its reply dropped, before the others moved off its CPUs."""
    other = node.container("Burstable", 500, cpus=ALL - node.held)
    if where == "nested":  # v1: a child within its parent's; v2: the parent's effective set says it all
        node.write_cpus(other["path"], ALL)
        node.write_cpus(other["path"] + "/init.scope", ALL)
    elif where == "v2 never written" and node.v2:
        (node.directory(other["path"]) / "cpuset.cpus").write_text("\n")
        (node.directory(other["path"]) / "cpuset.cpus.effective").write_text(str(ALL) + "\n")
    else:
        node.write_cpus(other["path"], ALL)
    assert check(node, node.pinned) is None
    assert node.run(node.pinned)[:4] == ("checked", "lab/pod-1/app (%s)" % node.pinned["id"][:12], str(node.held), 1)
    assert node.cpus(other) == ALL - node.held and check(node, node.pinned) is not None


@pytest.mark.parametrize("force", [False, True])
def test_when_the_kubelet_pins_cpus_every_container_passes_here(node, force):
    """The kubelet's checkpoint says static: kubecpu steps aside, answered here without the view (``--force``: the
    usual check)."""
    node.kubelet_pins()
    late = node.container("Guaranteed", 2000)
    for made in (node.pinned, node.shared, late):
        answer = check(node, made, force=force)
        if force:
            assert answer is None or answer["action"] == "checked"
        else:
            assert answer["action"] == "passed" and answer["container"] and answer["cpus"] == ""
            assert answer["note"].startswith("the kubelet pins CPUs on this node itself (%s" % node.kubelet_state)


@pytest.mark.parametrize("qos, millicpu", [("Burstable", 500), ("BestEffort", 0)])
def test_a_shared_container_on_the_shared_pool_is_checked(node, qos, millicpu):
    shared = node.container(qos, millicpu, cpus=ALL - node.held)
    assert check(node, shared) == {"action": "checked", "container": "lab/pod-%d/app (%s)" % (node.made, shared["id"][:12]),
                                   "cpus": str(ALL - node.held), "moved": 0}


@pytest.mark.parametrize("qos, millicpu, cpus", [
    ("Burstable", 500, ALL),  # on the exclusive CPUs too: the full hook moves it
    ("Guaranteed", 2000, ALL),  # Guaranteed and no entry: the full hook allocates
    ("Guaranteed", 1500, None),  # Guaranteed, not integral: only the pod model can tell it shares (below: pool)
])
def test_what_it_cannot_confirm_goes_to_the_full_hook(node, qos, millicpu, cpus):
    other = node.container(qos, millicpu, cpus=cpus if cpus is not None else ALL - node.held)
    assert check(node, other) is None


def test_a_container_whose_cgroup_differs_from_the_pool_goes_to_the_full_hook(node):
    node.write_cpus(node.shared["path"], ALL)  # a restarted container, its cgroup made again on every CPU
    assert check(node, node.shared) is None


def test_a_v2_cgroup_never_written_is_not_the_shared_pool(tmp_path):
    node = Node(tmp_path, v2=True)
    node.run(node.container("Guaranteed", 2000))
    shared = node.container("Burstable", 500)
    (node.directory(shared["path"]) / "cpuset.cpus").write_text("\n")
    assert check(node, shared) is None


def test_not_a_kubernetes_container_passes_without_a_view(tmp_path):
    node = Node(tmp_path, v2=False)
    plain = node.container(annotations=False)
    assert check(node, plain) == {"action": "passed", "container": "", "cpus": "", "moved": 0}


def test_no_view_or_a_stale_one_goes_to_the_full_hook(node):
    os.replace(view_path(node.state), node.state + ".aside")
    assert check(node, node.shared) is None
    os.replace(node.state + ".aside", view_path(node.state))
    assert check(node, node.shared) is not None
    data = open(node.state, "rb").read()
    with open(node.state, "wb") as handle:  # rewritten by someone else (the same bytes even)
        handle.write(data)
    assert check(node, node.shared) is None


def test_a_corrupt_state_file_is_never_confirmed(node):
    """The view is stale once the file changes, so the full hook reads the file and refuses it (test_hook)."""
    with open(node.state, "r+b") as handle:
        handle.seek(0)
        handle.write(b"#")
    assert check(node, node.shared) is None


def test_a_view_of_the_none_policy_goes_to_the_full_hook(node):
    state = StateStore(node.state).load()
    state.policy_name = "none"
    store = StateStore(node.state, "none")
    store.save(state)
    assert read_view(node.state)["policy"] == "none" and check(node, node.shared) is None


def test_bad_input_is_the_same_error_as_on_the_full_path(node):
    with pytest.raises(HookInputError, match="not JSON"):
        quick_check(b"{", node.state, str(node.cgroup))


def tree(root):
    return {os.path.join(top, name): os.stat(os.path.join(top, name)).st_mtime_ns
            for top, dirs, files in os.walk(root) for name in dirs + files}


def test_it_writes_nothing(node):
    before = tree(node.tmp)
    assert check(node, node.shared) is not None and check(node, node.pinned) is not None
    node.kubelet_pins()
    before = tree(node.tmp)
    assert check(node, node.shared)["action"] == check(node, node.pinned)["action"] == "passed"
    assert tree(node.tmp) == before

# Copyright: (c) 2026, kubecpu developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The action of kubecpu.cpu_manager.cpu_manager_preflight: see plugins/plugin_utils/module_action.py."""

from __future__ import annotations

from ansible_collections.kubecpu.cpu_manager.plugins.plugin_utils.module_action import ModuleAction


class ActionModule(ModuleAction):
    pass

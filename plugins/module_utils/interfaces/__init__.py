# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The glue at the top: ``bin/kubecpu``'s commands and flags, the Ansible modules' adapter and shared
argument spec, and the compile-once import finder of the modules' zip. May import every layer; no layer imports it
(only plugins/modules and bin/kubecpu do).
"""

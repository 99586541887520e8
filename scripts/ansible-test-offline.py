# -*- coding: utf-8 -*-
"""Stand-in for ansible-test's get-pip bootstrap, which needs the internet (see ENVIRONMENT.md).

ansible-test runs this file (cached as get_pip_24_2.py) inside each virtual environment it builds.
It bootstraps pip from the interpreter's bundled wheel, then installs what was asked for.
"""

import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap()
os.environ.pop("PIP_CONFIG_FILE", None)  # ensurepip points it at /dev/null, hiding the machine's pip settings
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))

"""``python -m simulations.cli``: the ``secagg-dp`` command without the installed script (e.g. from a checkout)."""

import sys

from simulations.cli import main

sys.exit(main())

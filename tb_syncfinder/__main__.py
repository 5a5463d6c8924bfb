"""``python -m tb_syncfinder``: the same as the ``tb-syncfinder`` command."""

import sys

from tb_syncfinder.cli import main

sys.exit(main())

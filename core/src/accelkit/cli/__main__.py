"""``python -m accelkit.cli``: the ``accelkit`` command without its console script."""

import sys

from accelkit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m foxwindow COMMAND ...`: see foxwindow.cli."""
import sys

from foxwindow.cli import main

sys.exit(main())

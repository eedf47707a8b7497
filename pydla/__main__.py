import sys

from pydla.cli import main

sys.exit(main())

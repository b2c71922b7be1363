import sys

from koordlet.cli import main

sys.exit(main())

import sys

from engine.frontends.cli import main

sys.exit(main())

import sys

from apollo.cli import main

if __name__ == "__main__":
    sys.exit(main())

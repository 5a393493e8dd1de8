"""`python -m sera.simulate`: the command line of sera.studies.simulate, under the name the stored
runs' provenance records. In code, import sera.studies.simulate."""

import sys

from sera.studies.simulate import main

if __name__ == "__main__":
    sys.exit(main())

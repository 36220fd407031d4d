"""``python -m mongoengine_ids.tools.bench``: run the benchmark."""

import sys

from mongoengine_ids.tools.bench import main

sys.exit(main())

"""``python -m mongoengine_ids.bench``: run the benchmark."""

import sys

from mongoengine_ids.bench import main

sys.exit(main())

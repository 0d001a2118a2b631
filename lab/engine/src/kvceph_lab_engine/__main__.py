"""`python -m kvceph_lab_engine` = the console script."""

from kvceph_lab_engine.cli import main

raise SystemExit(main())

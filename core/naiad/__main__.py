from naiad.cli import main

raise SystemExit(main())

from graphfeed.cli import main

raise SystemExit(main())

from torchwise.cli.main import main

raise SystemExit(main())

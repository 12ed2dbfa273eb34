"""The `torchwise` command: one module per subcommand, each thin (parse, call the library, print)."""

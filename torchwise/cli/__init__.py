"""The `torchwise` command: one module per subcommand (<name>_command.py), each thin (parse, call the library, print)."""

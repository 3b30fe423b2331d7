"""absl mains of the `tfdist` command. Flags are defined here only, never in the library."""

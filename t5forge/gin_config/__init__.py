"""Gin configuration: flags, syntax and binding checks, the names gin files bind, and T5X's
own files translated onto them. The commands in t5forge.cli parse with it; the library below
never imports it."""

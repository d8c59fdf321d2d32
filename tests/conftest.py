"""Suite-wide: this folder is on sys.path, so every test folder can import
the helpers beside this file (e.g. :mod:`processes`)."""

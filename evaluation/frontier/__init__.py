"""The quality-versus-size frontier across every family, and the best model under a target."""

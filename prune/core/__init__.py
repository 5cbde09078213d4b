"""What every family builds on: loading, architectures, calibration, hidden states, surgery, recipes."""

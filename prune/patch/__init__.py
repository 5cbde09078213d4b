"""The linear patch family: ReplaceMe\x27s map in place of a cut block."""

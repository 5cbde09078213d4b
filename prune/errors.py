"""User-facing errors: their message is shown as is, in the UI and on the command line."""


class LayerCutError(Exception):
    """An error whose message is written for the user, not a traceback."""


class ModelNotFound(LayerCutError):
    """The model id or folder could not be found (or the hub is unreachable)."""


class UnsupportedArchitecture(LayerCutError):
    """The model is not a decoder-only architecture whose layers we know how to cut."""


class ModelTooLarge(LayerCutError):
    """The model would not fit in the memory available."""


class InvalidCut(LayerCutError):
    """The requested block or layer set cannot be removed."""


class UnknownMethod(LayerCutError):
    """No importance method is registered under that name."""


class MissingDependency(LayerCutError):
    """An optional package needed for this feature is not installed."""


class InvalidInput(LayerCutError):
    """Any other bad input: an empty prompt, a missing data folder, a bad option."""


class OutOfMemory(LayerCutError):
    """A job ran out of CPU or GPU memory part-way, though the model itself was loaded."""


class BrokenModel(LayerCutError):
    """The model's files are incomplete or damaged: truncated weights, no weights, no usable tokenizer."""

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


QUOTE_CHARS = 60  # how much of a visitor's value a message shows


def quoted(value, limit: int = QUOTE_CHARS) -> str:
    """A visitor's value as a message shows it: its repr, cut after ``limit`` characters with '…'.

    A message never grows with what was typed (a 100,000-character option is not echoed whole).
    """
    if isinstance(value, str):
        return repr(value[:limit] + "…") if len(value) > limit else repr(value)
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return f"a {type(value).__name__} too long to show"
    return text if len(text) <= limit else text[:limit] + "…"

"""How an exception becomes a message: its first line, for one-line errors and logs."""


def one_line(error: BaseException) -> str:
  """The first line of `error`'s message, or its type's name when it has none."""
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__

"""Module doc."""
import os


@decorator
def top(a, b):
    """Doc.

not indented inside the docstring
    """
    return a + b


class Shop:
    # a comment at column 0 inside the class body is fine
    rate = 1

    def price(self, x):
        if x:
            return x
        return 0

    async def fetch(self):
        def inner():
            return 1
        return inner()


def price(x):
    return x

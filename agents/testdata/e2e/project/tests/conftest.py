import pytest


@pytest.fixture
def catalog():
    return {"apple": 0.5, "pear": 0.75}

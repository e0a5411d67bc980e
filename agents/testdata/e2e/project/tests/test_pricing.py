from shop.pricing import describe


def test_describe_joins_names():
    assert describe(["a", "b"]) == '"a, b"'

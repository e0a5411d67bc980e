from inventory.stock import restock


def test_restock_adds_units():
    assert restock({}, "apple", 2) == {"apple": 2}

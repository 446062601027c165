from core.read_once import ReadOnce


def test_a_key_is_read_once_a_missing_one_each_time_and_at_most_the_bound_are_kept():
    reads = []
    rows = {"a": 1, "b": 2, "c": 3}

    def read(key):
        reads.append(key)
        return rows.get(key)

    once = ReadOnce(read, most=2)
    assert [once("a"), once("a"), once("b"), once("b")] == [1, 1, 2, 2]
    assert reads == ["a", "b"]
    assert once("x") is None and once("x") is None
    assert reads == ["a", "b", "x", "x"]
    rows["x"] = 9  # created since: read, then kept
    assert once("x") == 9 and once("x") == 9
    assert reads.count("x") == 3
    assert len(once.kept) <= 2

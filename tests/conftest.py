from tests.realcgroup import real_tree  # noqa: F401  (fixture shared by integration tests and bench)

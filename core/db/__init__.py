"""The MariaDB/MySQL database backend (``ENGINE = "core.db"``): Django's, with transactions that open with
``START TRANSACTION`` and connections that find a ready node of a Galera cluster (``core.db.base``), and the
one switch of a cluster session's read mode (``core.db.reads``).
"""

"""Read selectors of the history: reused by the read API and the admin.

Every selector checks the parent first (namespace and access to every queue of the fixed
definition), then the child by (parent, id), then the cross-references of what it read;
a broken relation is UNAVAILABLE, never a partial answer. Selectors never write.
"""

"""Who may do what: root over a sudo login, one operator at a time, each cache group's own RGW user
and keys.
"""

"""The Ceph cluster: bounded ``ceph`` commands, what kvceph owns there, the zone, the bucket's
quota, policy and trim.
"""

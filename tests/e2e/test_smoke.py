from tests.serverproc import seed_groups, wait_status


def test_create_describe_delete_simulated(sim_server):
    c = sim_server.client()
    arn = c.create_cluster(ClusterName="smoke", InstanceGroups=seed_groups())["ClusterArn"]
    d = wait_status(c, "smoke", {"InService"})
    assert d["ClusterArn"] == arn
    assert [g["CurrentCount"] for g in d["InstanceGroups"]] == [1, 2]
    c.delete_cluster(ClusterName=arn)
    wait_status(c, "smoke", {"gone"})

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/topic"
)

// Issue 26, item 5: presence on the admin API: GET /v1/topics lists the topics with
// subscribers anywhere in the fleet (eventually consistent), a page at a time, with
// this node's figures; GET /v1/topics/{name} one topic; a bad name is a 400 with a JSON
// error.
func TestBinaryAdminTopics(t *testing.T) {
	base := []string{"--stream", "tcp://127.0.0.1:0", "--admin", "127.0.0.1:0", "--mesh", "127.0.0.1:0", "--remote", "127.0.0.1:0"}
	a, stopA := startBinary(t, append(base, "--node-id", "node-a")...)
	defer func() { _ = stopA() }()
	b, stopB := startBinary(t, append(base, "--node-id", "node-b", "--join", a["mesh"])...)
	defer func() { _ = stopB() }()
	testkit.Eventually(t, 10*time.Second, "both nodes see two members", func() bool { return countMembers(t, b["admin"]) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, ep := range []string{a["tcp"], a["tcp"], b["tcp"]} {
		c := testkit.DialConnector(t, ep, 10*time.Second)
		defer c.Close()
		for _, name := range []string{"lobby", []string{"alpha", "beta", "gamma"}[i]} {
			if err := c.Request(ctx, "subscribe", map[string]string{"topic": name}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	var all topicsJSON
	testkit.Eventually(t, 10*time.Second, "node-b knows the fleet's topics", func() bool {
		return getJSON(t, "http://"+b["admin"]+"/v1/topics", &all) == http.StatusOK && all.Total == 4 &&
			len(all.Topics) == 4 && all.Topics[3].Topic == "lobby" && all.Topics[3].Subscribers == 3
	})
	if lobby := all.Topics[3]; len(lobby.Nodes) != 2 || lobby.Nodes[0] != (topic.NodePresence{RID: "node-a", Subscribers: 2}) ||
		lobby.Nodes[1] != (topic.NodePresence{RID: "node-b", Subscribers: 1}) {
		t.Fatalf("lobby %+v", lobby)
	}
	if all.Stats.Topics != 2 || all.Stats.Subscriptions != 2 {
		t.Fatalf("node-b's own figures %+v", all.Stats)
	}
	var page topicsJSON
	if getJSON(t, "http://"+b["admin"]+"/v1/topics?limit=2", &page) != http.StatusOK || len(page.Topics) != 2 || page.Next != "beta" {
		t.Fatalf("first page %+v", page)
	}
	var second topicsJSON
	if getJSON(t, "http://"+b["admin"]+"/v1/topics?limit=2&after=beta", &second) != http.StatusOK || len(second.Topics) != 2 ||
		second.Topics[0].Topic != "gamma" || second.Next != "" {
		t.Fatalf("second page %+v", second)
	}
	var one topic.Presence
	if getJSON(t, "http://"+a["admin"]+"/v1/topics/lobby", &one) != http.StatusOK || one.Subscribers != 3 {
		t.Fatalf("GET /v1/topics/lobby: %+v", one)
	}
	var nobody topic.Presence
	if getJSON(t, "http://"+a["admin"]+"/v1/topics/nobody", &nobody) != http.StatusOK || nobody.Subscribers != 0 || len(nobody.Nodes) != 0 {
		t.Fatalf("GET /v1/topics/nobody: %+v", nobody)
	}
	var bad map[string]any
	if code := getJSON(t, "http://"+a["admin"]+"/v1/topics/bad%20name", &bad); code != http.StatusBadRequest || bad["error"] != "invalid_operation" {
		t.Fatalf("GET /v1/topics/bad name: %d %v", code, bad)
	}
	if code := getJSON(t, "http://"+a["admin"]+"/v1/topics?limit=0", &bad); code != http.StatusBadRequest {
		t.Fatalf("GET /v1/topics?limit=0: %d", code)
	}
}

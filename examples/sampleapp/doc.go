// Package sampleapp is the application the meshnode binary serves by default, and a
// small example of the application API: a session written as a packet router
// (session.Mux) and a `room` Actor kind that sessions bind to, wherever in the mesh it
// lives.
//
//	Request "echo"      -> Response with the same payload and codec
//	Send "echo"         -> Send "echo" back with the same payload and codec
//	Request "fail"      -> Error with code "rejected"
//	Request "bind"      {"actor":ID} -> binds the session to room ID (placed by the
//	                    directory); answers {"actor":ID,"node":RID,"bindingGeneration":G}
//	Request "unbind"    {"actor":ID} -> unbinds; answers {}
//	Request "room.echo" -> relayed; the room answers {"actor":ID,"node":RID,"payload":<request>,
//	                       "served":N} where N counts the room.echo requests the room has
//	                       served, carried across relocations and kept in the node's
//	                       store (saved before the answer: it survives a crash)
//	Send "room.say"     -> relayed; the room pushes Send "room.said" with the same payload,
//	                       and publishes it to the topic "room:ID" for its followers
//	When another session binds the same room, this one gets Send "room.replaced"
//	{"actor":ID} and is closed. With several rooms bound, metadata key "actor" picks one.
//
// Topics (one publisher, many sessions, on any node; docs/topics.md):
//
//	Request "subscribe"     {"topic":T} -> answers {} once the subscription is in force
//	Request "unsubscribe"   {"topic":T} -> answers {}
//	Request "publish"       {"topic":T,"payload":ANY} -> answers {}; every session
//	                        subscribed to T gets Send "topic.message"
//	                        {"topic":T,"payload":ANY,"seq":N}, N counting this session's
//	                        messages to T from 1
//	Request "room.follow"   {"actor":ID} -> the session gets Send "room.said" for what
//	                        room ID is told to say, whoever is bound to it; answers {}
//	Request "room.unfollow" {"actor":ID} -> answers {}
//	A subscriber that falls behind is dropped from its topics with Send "topic.dropped".
//
// Plugin services (docs/services.md; the binary serves them with meshnode call and
// meshnode watch):
//
//	nodeinfo.describe {}    -> {"node":RID,"members":N}, a server service of every node
//	counter (a session service of the worker of the session attached to):
//	  add {"n":N}           -> {"value":V}, the count after adding N
//	  get {}                -> {"value":V}
//	  value                 replicated state: the count (moves with the worker)
//	  changed               events: {"from":A,"to":B} per change
//
// Handlers return errors; the router answers a failed Request with the code of the
// error's kind (package fault), so there is no mapping here.
package sampleapp

"""What the two HTTP front doors (the playground, `web/`, and the OpenAI-compatible server, `serve/`) share,
so that both guard, bound, reap and stop the same way:

    guard.py         the Host and Origin guard (DNS rebinding, other sites' pages)
    generations.py   the bounded pool of running generations, cancelled when a client leaves or the server stops
    lifespan.py      the model, loading on a thread of its own while the server answers, as a dependency
    connections.py   uvicorn's HTTP and websocket protocols with idle, unfinished and dead connections closed
    server.py        uvicorn's settings and run: bounded connections and bodies, and a clean stop on a signal
"""

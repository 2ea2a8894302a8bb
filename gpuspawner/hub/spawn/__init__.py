"""What a user sees as they start a server: the spawn form, worded part by part (`form`, and its
template in `templates/`) and put together for one user from the books (`page`), and the
notices a stopped server leaves for its user, with the way back (`notices`). The spawner
itself is `hub.server`, above every room."""

"""build-image's application service: plan an image from a request, render it, build, push and certify it.

`plan.plan_image` turns a BuildRequest into a validated Plan (pure but for reading the spec, the
knowledge base and the user's directories); `build` writes the context and drives the Docker adapter.
"""

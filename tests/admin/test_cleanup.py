"""gpuspawner cleanup: our stopped containers and the dangling images they leave, nothing else."""

import io
import secrets

import docker
import pytest
from admintools import gpuspawner, servers
from realhub import CPU_IMAGE

from gpuspawner.admin.cleanup import IMAGE_LABEL, pick_images
from gpuspawner.core.pool import Grant, Holder


def test_dangling_images_go_if_ours_and_unused():
    dangling = {
        "used-by-a-stopped-server": {},
        "built-from-images": {IMAGE_LABEL: "gpu"},
        "built-from-images-but-in-use": {IMAGE_LABEL: "cpu"},
        "someone-elses": {"maintainer": "them"},
    }
    picked = pick_images(
        dangling, freed={"used-by-a-stopped-server"}, in_use={"built-from-images-but-in-use"}
    )
    assert picked == {"used-by-a-stopped-server", "built-from-images"}


class Images:
    """Images this test builds (FROM scratch: labels only), removed at the end."""

    def __init__(self, label: str) -> None:
        self.client = docker.from_env()
        self.label = label
        self.ids: set[str] = set()

    def build(self, name: str, generation: int, **labels: str) -> str:
        """Build `name`; building it again with another generation leaves the first dangling."""
        extra = " ".join(f"{key}={value}" for key, value in labels.items())
        # one instruction, so the build leaves no intermediate image behind
        dockerfile = f"FROM scratch\nLABEL {self.label} name={name} generation={generation} {extra}"
        image, _ = self.client.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=f"gpuspawner-test-{name}:latest", rm=True
        )
        self.ids.add(image.id)
        return image.id

    def exists(self, image: str) -> bool:
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            return False
        return True

    def remove_all(self) -> None:
        for image in self.ids:
            if self.exists(image):
                self.client.images.remove(image, force=True)


@pytest.fixture
def images():
    made = Images(f"gpuspawner.test={secrets.token_hex(4)}")
    yield made
    made.remove_all()


def short(image: str) -> str:
    return image.removeprefix("sha256:")[:10]


@pytest.mark.docker
def test_cleanup_lists_then_removes_only_our_leftovers(tmp_path, images):
    token = images.label.split("=")[1]
    test_label = {"gpuspawner.test": token}
    stopped = Grant(Holder(1, 1, "ann", "old"), (), 0.0)
    with servers("cleanup") as made, servers("otherhub") as other_hub:
        # a server that stopped while nobody watched, on an image a rebuild then untagged
        old_image = images.build(f"{token}-a", 1)
        made.create("ann--old", old_image, stopped, start=False, labels=test_label)
        images.build(f"{token}-a", 2)
        # an image built from images/ that a rebuild untagged: ours, unused
        ours_unused = images.build(f"{token}-b", 1, **{IMAGE_LABEL: "gpu"})
        images.build(f"{token}-b", 2, **{IMAGE_LABEL: "gpu"})
        # dangling but not ours; dangling and ours but still used by another container
        theirs = images.build(f"{token}-c", 1)
        images.build(f"{token}-c", 2)
        in_use = images.build(f"{token}-d", 1, **{IMAGE_LABEL: "cpu"})
        made.create("not-a-server", in_use, None, start=False, labels=test_label)
        images.build(f"{token}-d", 2, **{IMAGE_LABEL: "cpu"})
        # a running server, and a stopped one of another hub (another prefix)
        made.create("bob", CPU_IMAGE, Grant(Holder(2, 2, "bob"), (), 0.0), labels=test_label)
        other_hub.create("cat", CPU_IMAGE, stopped, start=False, labels=test_label)

        args = ("cleanup", "--prefix", made.prefix, "--label", images.label)
        dry = gpuspawner(*args, cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr
        listed = dry.stdout
        assert (
            f"Stopped gpuspawner containers (1):\n  {made.prefix}-ann--old  server ann/old"
            in listed
        )
        assert "Dangling images (2):" in listed
        assert short(old_image) in listed and short(ours_unused) in listed
        for kept in (theirs, in_use):
            assert short(kept) not in listed
        for kept in ("not-a-server", "bob", other_hub.prefix):
            assert kept not in listed
        assert listed.rstrip().endswith("Run again with --yes to remove them.")
        assert images.exists(old_image) and images.exists(ours_unused)

        done = gpuspawner(*args, "--yes", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"Removed container {made.prefix}-ann--old" in done.stdout
        assert f"Removed image {short(old_image)}" in done.stdout
        assert f"Removed image {short(ours_unused)}" in done.stdout
        assert not images.exists(old_image) and not images.exists(ours_unused)
        assert images.exists(theirs) and images.exists(in_use)
        # this test's containers only: another worker's may go between Docker's list and
        # docker-py's look at each, which raised NotFound here under load
        mine = docker.from_env().containers.list(all=True, filters={"label": images.label})
        names = {c.name for c in mine}
        assert {
            f"{made.prefix}-not-a-server",
            f"{made.prefix}-bob",
            f"{other_hub.prefix}-cat",
        } <= names
        assert f"{made.prefix}-ann--old" not in names

        again = gpuspawner(*args, cwd=tmp_path)
        assert again.returncode == 0
        assert again.stdout.startswith("Nothing to clean up")

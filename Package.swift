// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "marfafs",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "marfafs", targets: ["marfafs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .target(name: "MarfaModel"),
        .target(name: "MarfaLayout", dependencies: ["MarfaModel", "Yams"]),
        .target(name: "MarfaStore", dependencies: [
            "MarfaModel", "MarfaLayout",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "GRDBSQLite", package: "GRDB.swift"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "MarfaFS", dependencies: [
            "MarfaModel", "MarfaLayout", "MarfaStore",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        .target(name: "MarfaFUSE", dependencies: [
            "MarfaFS", "CFuse",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "MarfaServer", dependencies: [
            "MarfaModel",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
        ]),
        .target(name: "MarfaSync", dependencies: [
            "MarfaModel", "MarfaStore",
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ]),
        .executableTarget(name: "marfafs", dependencies: [
            "MarfaModel", "MarfaLayout", "MarfaStore", "MarfaFS", "MarfaFUSE", "MarfaServer", "MarfaSync",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "MarfaTestSupport", dependencies: ["MarfaModel"]),
        .testTarget(name: "MarfaLayoutTests", dependencies: [
            "MarfaLayout", "MarfaModel",
            .product(name: "PropertyBased", package: "swift-property-based"),
        ]),
        .testTarget(name: "MarfaStoreTests", dependencies: ["MarfaStore", "MarfaModel", "MarfaLayout", "MarfaTestSupport", .product(name: "GRDB", package: "GRDB.swift")]),
        .testTarget(name: "MarfaFSTests", dependencies: [
            "MarfaFS", "MarfaStore", "MarfaModel", "MarfaLayout", "MarfaTestSupport", .product(name: "Logging", package: "swift-log"),
            .product(name: "PropertyBased", package: "swift-property-based"),
        ]),
        .testTarget(name: "MountTests", dependencies: ["MarfaTestSupport", "MarfaModel"]),
        .testTarget(name: "MarfaSyncTests", dependencies: [
            "MarfaSync", "MarfaModel", "MarfaStore", "MarfaTestSupport", .product(name: "Logging", package: "swift-log"),
            .product(name: "PropertyBased", package: "swift-property-based"),
        ]),
        .testTarget(name: "ServerTests", dependencies: ["MarfaTestSupport", "MarfaModel", "MarfaServer"]),
    ]
)
